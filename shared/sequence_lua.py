"""The Lua the sequence scripts share now lives in ``shared/lua/_sequence_lib.lua`` (who may hold
a sequence, how a binding moves) and ``shared/lua/_sequence_pull.lua`` (filling free slots from
the backlog), included by each sequence script at load (``shared.lua``).

Kept as a pointer (no code) so that this module's path stays while packages are reorganised;
delete it once nothing refers to it.
"""
