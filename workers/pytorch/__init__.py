"""PyTorch worker backend: TorchScript and torch.export models."""
