"""trainperf: measure, explain and predict the performance of LLM training.

Layers (lower never imports higher): specs < accounting < records < ingest < predict < plan
< measure < report < cli. See docs/DESIGN.md. Importing this package has no side effects and
never imports torch.
"""

__version__ = "0.1.0"
