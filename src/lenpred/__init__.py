"""lenpred: decode-length prediction for LLM serving.

How many tokens will a request generate, how well can that be known from the prompt alone, and
what is a prediction worth to a scheduler. See README.md and shared DESIGN notes.
"""

__version__ = "0.1.0"
