"""What runs inside each sandbox worker's processes (the server, the zygote, the children).

Started by the front as ``python -I``; imports the standard library, this package and
``sandbox.wire`` only, never the trusted side or third-party packages: every module here is
mapped into the zygote, whose every page each fork copies, and runs beside untrusted code.
"""
