"""Fits that turn the curated kernel measurements into data/params.json (build time only)."""
