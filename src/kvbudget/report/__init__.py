"""L4: render result documents to Markdown, HTML (charts) and CSV."""
