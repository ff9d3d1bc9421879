from . import app

app.run()
