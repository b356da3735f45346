# Shared by the scripts: where the project's Python environment (with LibTorch) lives.
# Kept outside the checkout so that every clone on a machine reuses one 5 GB install.
TORCH_VERSION_PIN="2.11.0"
TORCHVISION_VERSION_PIN="0.26.0"
NVJPEG_VERSION_PIN="13.0.1.86"  # what torch's cuda-toolkit==13.0.2 pin resolves nvjpeg to
CUDNN_FRONTEND_VERSION_PIN="1.32.0"  # header-only C++ graph API for backend.compile's fused batch norm
TRAINBENCH_VENV="${TRAINBENCH_VENV:-$HOME/.cache/trainbench/venv-torch-$TORCH_VERSION_PIN}"
TRAINBENCH_PYTHON="$TRAINBENCH_VENV/bin/python"
# apache-otava for scripts/otava-crosscheck.py, in a small environment of its own: it pins a
# NumPy of its own, and only its analysis module (NumPy and SciPy) is used.
OTAVA_VERSION_PIN="0.8.0"
TRAINBENCH_OTAVA_VENV="${TRAINBENCH_OTAVA_VENV:-$HOME/.cache/trainbench/venv-otava-$OTAVA_VERSION_PIN}"
