"""What runs inside each sandbox worker's processes (the server, the zygote, the children).
Standard library, this package and ``sandbox.wire`` only: every module here is mapped into the
zygote, whose every page each fork copies, and runs beside untrusted code."""
