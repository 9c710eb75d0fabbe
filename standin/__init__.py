"""A stand-in inference engine: what a container node runs where a real vLLM or SGLang cannot.

It is started by the very command lines the ModelDeployment controller renders
(``vllm serve <model> …`` and ``python3 -m sglang.launch_server --model-path <model> …``), refuses a
flag its engine would refuse (the engines' own flag tables, ``flags/``), checks that the weights it is
given are a readable model, and serves what the controller, the routers and users call: ``/health``,
``/v1/models``, ``/v1/completions`` and ``/v1/chat/completions`` with deterministic tokens, and
``/metrics``. It computes nothing on an accelerator; ``/v1/models`` says so.
"""
