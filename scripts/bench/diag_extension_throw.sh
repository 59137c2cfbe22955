set -x
export PYTHONPATH=$PWD
g++ --version | head -1; nvcc --version | tail -2
python3 -c "import torch; print(torch.__version__, torch._C._GLIBCXX_USE_CXX11_ABI); print(torch.__config__.show())" 2>&1 | grep -E "^2|GCC|CXX_FLAGS|True|False" | cut -c1-400
[ -f build/kernels/bert_kernels_cuda.so ] || python3 -m kernels.build --build-dir build/kernels --arch 9.0 --jobs 16 2>&1 | tail -2
ls -la build/kernels/*.so && ldd build/kernels/bert_kernels_cuda.so | grep -E "stdc|c10|torch|gcc"
timeout 60 python3 - <<'PY' 2>&1 | tail -5
import torch, kernels
print("available", kernels.available(), kernels.load_error())
raw = torch.ops.bert_kernels_cuda
x = torch.randn(7, 1024, device="cuda", dtype=torch.float16); w = torch.randn(1024, 1024, device="cuda", dtype=torch.float16); b = torch.randn(1024, device="cuda", dtype=torch.float16)
r = raw.dense_forward(x, w, b, False); print("good call ok", flush=True)
try:
    raw.dense_forward(x, w.t(), b, False)
except RuntimeError as e:
    print("caught", str(e)[:100])
PY
echo "rc=$?"
cat > /tmp/t.py <<'PY'
import torch
from torch.utils.cpp_extension import load_inline
m = load_inline("thrower", cpp_sources="void f(){ TORCH_CHECK(false, \"boom\"); }", functions=["f"], build_directory=None, verbose=False)
try:
    m.f()
except RuntimeError as e:
    print("inline caught", e)
PY
timeout 80 python3 /tmp/t.py 2>&1 | tail -3; echo "rc=$?"
