"""A handler on the Python SDK (sdk/python), for either transport, that
returns the Python value its args spell as a literal: what the sidecar stores
for it must read back through Soniq like what a Soniq worker stores for the
same value (soniq_interop_test.go)."""
import ast

import soniq_handler

app = soniq_handler.App(concurrency=2, sync_concurrency=1)


@app.job("interop.literal")
async def literal(args):
    return ast.literal_eval(args["literal"])


app.run()
