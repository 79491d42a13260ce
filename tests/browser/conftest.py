"""The web console's browser tests start their server as the SDK tests do: `Server`, `admin`,
`ADMIN` and `ROOT` are tests/python/conftest.py's, loaded under another module name (both
files are `conftest`)."""
import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[1] / "python" / "conftest.py"
_spec = importlib.util.spec_from_file_location("decide_sdk_conftest", _path)
_sdk = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_sdk)

ADMIN, ROOT, Server, admin = _sdk.ADMIN, _sdk.ROOT, _sdk.Server, _sdk.admin
