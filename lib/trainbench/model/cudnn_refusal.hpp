#pragma once
// Which cuDNN statuses mean "cuDNN declines this problem for its parameters" (a shape, layout or
// type it has no engine for, not enough shared memory): the fused batch norm then runs that
// shape unfused and remembers it. Every other status is a failure to report: memory, the driver,
// the architecture, the runtime, a misused API (a defect here). One rule for both of the fused
// batch norm's routes: cuDNN's status code (the batch-norm Ex call) and the names of statuses in a
// cuDNN frontend error's message (the graphs). No torch or cuDNN headers: tested on the CPU.
#include <string>

namespace trainbench {

// cuDNN 9's codes (cudnn_graph.h): BAD_PARAM itself (2000, not its sub-codes, which name misuse),
// NOT_SUPPORTED and its graph pattern, shape, data type and layout (3000-3004), shared memory,
// padding and launch parameters (3010-3012). Not the driver, runtime, architecture or library
// availability (3005-3009): those fail every shape alike.
bool cudnn_status_declines(int code);

// What the "CUDNN_STATUS_..." names in a message say, CUDNN_STATUS_SUCCESS left out (the
// frontend quotes failed checks as "CUDNN_STATUS_SUCCESS != call(...)").
enum class cudnn_status_names {
  none,     // no status named: the frontend's own error code decides
  decline,  // every status named declines the problem
  failure,  // some status named is a failure (or one this rule does not know)
};
cudnn_status_names judge_cudnn_status_names(const std::string& message);

}  // namespace trainbench
