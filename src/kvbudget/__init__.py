"""kvbudget: auditable KV-cache budgets for LLM serving.

Calculate (``calc``), plan (``plan``), simulate (``sim``), measure (``bench``) and
accept (``accept``) the KV-cache budget of a model deployment. Every figure says what it is:
computed, simulated (with its timing model) or measured (engine, version, hardware).
"""

__version__ = "0.1.0"
