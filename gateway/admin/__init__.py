"""The admin API under ``/v2/admin/``: weights, shadow traffic, tenants and keys."""
