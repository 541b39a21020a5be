"""Triton's FIL backend: tree models (XGBoost, LightGBM, scikit-learn via Treelite) on CPU."""
