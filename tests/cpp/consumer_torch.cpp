// A LibTorch consumer of cake_rmsnorm.hpp: forward with residual and backward (functional and
// out forms) on CPU tensors, checked against ATen's own FP64 computation.
#include <ATen/ATen.h>

#include <cstdio>

#include "cake_rmsnorm/cake_rmsnorm.hpp"

int main() {
  const int64_t T = 33, H = 520;
  at::manual_seed(0);
  auto opts = at::TensorOptions().dtype(at::kBFloat16);
  at::Tensor x = at::randn({T, H}, opts), r = at::randn({T, H}, opts), g = at::randn({T, H}, opts);
  at::Tensor w = (1 + 0.1 * at::randn({H})).to(at::kBFloat16);

  auto [y, rstd, h] = cake_rmsnorm::forward_residual(x, r, w, 1e-6);
  at::Tensor hd = h.to(at::kDouble);
  at::Tensor rstd_ref = at::rsqrt(hd.pow(2).mean({-1}) + 1e-6);
  at::Tensor y_ref = hd * rstd_ref.unsqueeze(-1) * w.to(at::kDouble);
  const double y_err = (y.to(at::kDouble) - y_ref).abs().max().item<double>();
  const double rstd_err = ((rstd.to(at::kDouble) - rstd_ref).norm() / rstd_ref.norm()).item<double>();

  auto [dx, dw] = cake_rmsnorm::backward(g, h, w, rstd);
  at::Tensor xhat = hd * rstd_ref.unsqueeze(-1), gd = g.to(at::kDouble), wd = w.to(at::kDouble);
  at::Tensor dx_ref = rstd_ref.unsqueeze(-1) * (gd * wd - (gd * wd * xhat).mean({-1}, true) * xhat);
  at::Tensor dw_ref = (gd * xhat).sum(0);
  const double dx_err = (dx.to(at::kDouble) - dx_ref).abs().max().item<double>();
  const double dw_err = ((dw.to(at::kDouble) - dw_ref).norm() / dw_ref.norm()).item<double>();

  at::Tensor dx2 = at::empty_like(dx), dw2 = at::empty({H}, at::kFloat);
  at::Tensor ws = at::empty({static_cast<int64_t>(cake_rmsnorm_backward_workspace_bytes(T, H))}, at::kByte);
  cake_rmsnorm::backward_out(g, h, w, rstd, std::nullopt, dx2, dw2, ws);
  at::Tensor dx3 = at::empty_like(dx), acc = at::ones({H}, at::kFloat);
  cake_rmsnorm::backward_out(g, h, w, rstd, std::nullopt, dx3, acc, ws, /*accumulate=*/true);
  const bool same = at::equal(dx2, dx) && at::equal(dw2, dw) && at::equal(dx3, dx) &&
                    at::allclose(acc, dw + 1, 1e-6, 1e-6);

  std::printf("libtorch: y err %.3g, rstd rel-L2 %.3g, dx err %.3g, dw rel-L2 %.3g, out form equal %d\n", y_err,
              rstd_err, dx_err, dw_err, same);
  const bool ok = y_err < 3e-2 && rstd_err < 1e-5 && dx_err < 3e-2 && dw_err < 1e-4 && same;
  std::printf(ok ? "libtorch consumer OK\n" : "libtorch consumer FAILED\n");
  return ok ? 0 : 1;
}
