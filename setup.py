"""tb-perfdiag: a TensorBoard plugin that tells why the accelerator sits idle."""
import re

from setuptools import Extension, find_packages, setup

with open("tb_perfdiag/_version.py", encoding="utf-8") as f:
    VERSION = re.search(r'__version__ = "([^"]+)"', f.read()).group(1)

MCP = "mcp>=2.0,<3; python_version >= '3.10'"

setup(
    name="tb-perfdiag",
    version=VERSION,
    description="TensorBoard Diagnose tab: device idle gaps, duty cycle per step and the host "
                "ops behind them, for XLA (XSpace) and PyTorch (Kineto) traces",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.9",
    packages=find_packages(include=["tb_perfdiag", "tb_perfdiag.*"]) + ["tb_perfdiag.frontend"],
    package_dir={"tb_perfdiag.frontend": "frontend"},
    package_data={"tb_perfdiag.frontend": ["*.js", "*.css", "*.html", "*.svg", "lib/*.js"],
                  "tb_perfdiag": ["schema/*.json", "SKILL.md"]},
    install_requires=[
        "tensorboard>=2.16",
        "werkzeug>=2.0",
        "protobuf>=6.31,<8",
        "numpy>=1.24",
        "orjson>=3.9",
        "fsspec>=2023.1",
        "isal>=1.6",
        # pods: host analyses as Dask tasks (a LocalCluster, or any cluster by address);
        # cryptography makes the local cluster's TLS key
        "distributed>=2024.8",
        "cryptography>=42",
        # the trace viewer the Diagnose tab hands gaps to (its overlay and the Profile tab)
        "tensorboard-plugin-profile>=2.19",
    ],
    extras_require={
        # tb-perfdiag mcp: the official Model Context Protocol SDK (its 2.x API: MCPServer)
        "mcp": [MCP],
        # pytest-xdist: scripts/test.sh runs the tests on every core (--dist worksteal)
        "test": ["pytest>=8", "pytest-xdist>=3.6", "hypothesis>=6.100", "playwright>=1.45",
                 "jsonschema>=4.20",
                 "xmlschema>=3.0", MCP,
                 # an S3-compatible server the result-store tests start (moto's server mode)
                 "s3fs>=2024.2", "moto[server]>=5"],
    },
    ext_modules=[Extension("tb_perfdiag._native",
                           ["native/module.c", "native/common.c", "native/xspace.c",
                            "native/kineto.c", "native/passes.c", "native/search.c",
                            "native/pages.c", "native/hlo.c"],
                           depends=["native/common.h", "native/methods.h", "native/strings.h",
                                    "native/search.h", "native/pages.h"], optional=True,
                           extra_compile_args=["-O3"])],
    entry_points={
        "tensorboard_plugins": ["perfdiag = tb_perfdiag.plugin:DiagnoseLoader"],
        "console_scripts": ["tb-perfdiag = tb_perfdiag.cli:main"],
    },
)
