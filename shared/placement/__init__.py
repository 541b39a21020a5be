"""Where models live in ``on_demand`` mode: pure policies and the arithmetic of memory budgets.

Every module here is a pure function of what the caller read from the fleet (except
``budget.machine_memory_bytes``, which reads the host once): the placer and the workers call
them with numbers, so each rule is tested without Redis, processes or clocks.
"""
