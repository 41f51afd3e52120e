"""tools/grpc-body.py as a module the other Python tools import (its file
name has a dash, so `import` cannot name it): its protobuf helpers
(`varint`, `field_bytes`, `key`, `value`, ...), loaded once, here."""
import importlib.util
import pathlib

_path = pathlib.Path(__file__).with_name("grpc-body.py")
_spec = importlib.util.spec_from_file_location("grpc_body_script", _path)
_script = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_script)
globals().update({k: v for k, v in vars(_script).items() if not k.startswith("__")})
