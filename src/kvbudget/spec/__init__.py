"""L0: model structure (ModelSpec, layer kinds), resolution from config.json, GPU catalog."""
