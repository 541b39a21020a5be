"""An OpenAI-compatible front end (``/v1/models``, ``/v1/completions``,
``/v1/chat/completions``) over the data plane's streams, for generative models that follow
Triton's vLLM-backend interface (``text_input`` → ``text_output``, decoupled)."""
