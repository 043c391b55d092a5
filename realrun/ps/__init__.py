"""The parameter-server core, ps-lite's and MXNet KVStore's parts: the wire format, the
transport, registration and ranks, request tracking, the worker and server sides of the
KVStore, the scheduler, the server's optimizer, gradient compression and the opt-in message
trace."""
