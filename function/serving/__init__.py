"""The serving edge: the gRPC server and its workers, RunFunction, the command line and render."""
