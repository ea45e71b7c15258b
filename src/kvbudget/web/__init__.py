"""L5: the web calculator page and its JSON API."""
