"""The on_demand placer (``--model-control-mode on_demand``): lease, fleet view, loop."""
