"""PyTorch's expandable segments for tools/gpu-check.sh: run with
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, the caching allocator maps its segments with
cuMemCreate / cuMemMap. Under salus that memory is the job's: the used memory cuMemGetInfo
reports (the job's live memory under salus) must cover what PyTorch reserved. Prints
reserved_mib, used_mib and final_loss=<v>."""
import os

import torch

assert "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), \
    "run with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
torch.manual_seed(0)
device = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(),
                            torch.nn.Linear(4096, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(8192, 1024, device=device)
y = torch.randint(0, 10, (8192,), device=device)
for step in range(100):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
print(f"reserved_mib={torch.cuda.memory_reserved() >> 20} used_mib={(total - free) >> 20}")
print(f"final_loss={loss.item():.6f}")
