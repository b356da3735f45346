#pragma once
// Batch norm with ReLU, and with the residual add and ReLU, through cuDNN's batch-norm "Ex" calls:
// cudnnBatchNormalizationForwardTrainingEx and cudnnBatchNormalizationBackwardEx with
// CUDNN_BATCHNORM_OPS_BN_ACTIVATION / _BN_ADD_ACTIVATION, NHWC, CUDNN_BATCHNORM_SPATIAL_PERSISTENT,
// fp16 activations and fp32 scale, bias and statistics. The same persistent NHWC kernels PyTorch's
// own fp16 batch norm calls (with CUDNN_BATCHNORM_OPS_BN), here with the add and the ReLU in their
// epilogue and the ReLU's bit mask in cuDNN's reserve space; what MXNet and PaddlePaddle ran for
// NVIDIA's earlier MLPerf ResNets. The second route of backend.compile's fused batch norm, taken
// where cuDNN's graph API refuses a fusion (cuda/cudnn_batch_norm.hpp). cuDNN 9 marks these calls
// deprecated; they are found in the libcudnn.so.9 torch has loaded, so nothing links cuDNN.
#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/modules/batchnorm.h>

#include <string>

namespace trainbench {

// "" where this process can make the Ex calls with activations of `dtype`, else why not (fp16
// only: the frameworks that ran these ops, and the [gpu] tests, run them on half inputs;
// libcudnn.so.9 or one of its functions not found).
std::string cudnn_ex_unavailable(at::ScalarType dtype);

// relu(bn(x) [+ residual]) through the Ex calls, autograd-aware (the backward gives dx, the
// weight's and bias's gradients and, with a residual, its gradient); updates bn's running
// statistics and batch counter as bn(x) does. x: CUDA N,C,H,W in fp16 (made NHWC if it is not);
// residual may be undefined. unbias_running_var: correct a running variance cuDNN would update with
// the biased batch variance (the probe finds which, as for the graphs). Where cuDNN refuses,
// throws a std::runtime_error naming the call and cuDNN's status.
torch::Tensor cudnn_ex_batch_norm_relu(torch::nn::BatchNorm2dImpl& bn, const torch::Tensor& x,
                                       const torch::Tensor& residual, bool unbias_running_var = false);

// "" where cuDNN runs the Ex calls (add: with the residual) for bn at N, C, H, W in dtype, else
// why not. Decided once per shape, eps and add by running the forward and the backward once on a
// scratch problem of that shape (bn itself is not touched), remembered and logged once; a status
// other than cuDNN's refusal (out of memory, a driver error) is thrown, not remembered. Not
// during a CUDA graph capture.
std::string cudnn_ex_refusal(const torch::nn::BatchNorm2dImpl& bn, at::IntArrayRef nchw, at::ScalarType dtype,
                             bool add);

}  // namespace trainbench
