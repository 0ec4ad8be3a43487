"""What the tests share: specs and manifests to start from, real peers, pods run as processes, judges.

Modules here are imported as `support.<module>` (pytest puts tests/ on the path); the
scripts among them (cache_growth, flower_args, flower_parse, cli_server) also run on their own.
"""
