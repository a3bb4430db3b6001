"""A small PyTorch training loop for tools/gpu-check.sh: runs under `salusctl run` unchanged.
Prints final_loss=<v> and the memory PyTorch thinks it has (the job's budget under salus)."""
import torch

torch.manual_seed(0)
device = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
x = torch.randn(1024, 256, device=device)
y = torch.randint(0, 10, (1024,), device=device)
for step in range(200):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
print(f"torch_mem_get_info total_mib={total >> 20} free_mib={free >> 20}")
print(f"final_loss={loss.item():.6f}")
