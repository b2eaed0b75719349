"""CP_ERP_IMAGE and CP_POSTGRES_IMAGE set but empty (a deployment description passing
an unset variable through) mean the defaults; CP_PROXY_IMAGE empty means no proxy."""

from control_plane.infra import config


def _load(tmp_path, **env):
    return config.load(environ={"CP_DATA_DIR": str(tmp_path), "CP_SECRET_KEY": "k",
                                **{f"CP_{k}": v for k, v in env.items()}})


def test_empty_image_settings(tmp_path):
    s = _load(tmp_path, ERP_IMAGE="", POSTGRES_IMAGE="", PROXY_IMAGE="")
    assert s["ERP_IMAGE"] == "odoo:{erp_version}" and s["POSTGRES_IMAGE"] == "postgres:16"
    assert s["PROXY_IMAGE"] == ""
    s = _load(tmp_path, ERP_IMAGE="registry.example/erp:{erp_version}")
    assert s["ERP_IMAGE"] == "registry.example/erp:{erp_version}"
