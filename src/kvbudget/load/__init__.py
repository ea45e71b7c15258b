"""L2: async OpenAI-compatible load runner and Prometheus scraping (real HTTP)."""
