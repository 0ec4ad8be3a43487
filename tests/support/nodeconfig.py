"""A SuperNode's --node-config as its container gets it: the pod's variables, expanded as the kubelet does."""

from __future__ import annotations

# The variables a node config's placeholders become, in one SuperNode pod: index 2 of its pool, 9 of all
# pools, on node gpu-node-1.
POD_ENV = {"FLOWER_INDEX": "2", "FLOWER_GLOBAL_INDEX": "9", "FLOWER_NODE_NAME": "gpu-node-1"}


def kubelet_expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' documented $(VAR) expansion of container args: $$ is a literal $,
    $(NAME) is the variable when defined, anything else is left as it is."""
    out, i = [], 0
    while i < len(text):
        if text.startswith("$$", i):
            out.append("$")
            i += 2
        elif text.startswith("$(", i) and ")" in text[i:]:
            end = text.index(")", i)
            name = text[i + 2 : end]
            out.append(env.get(name, text[i : end + 1]))
            i = end + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)
