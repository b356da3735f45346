// Which cuDNN statuses the fused batch norm remembers as a shape's refusal (it then runs that
// shape unfused), and which it reports as failures: one rule for the Ex call's status codes and
// the graphs' frontend messages (model/cudnn_refusal.hpp). Torch-free, on the CPU.
#include <catch2/catch.hpp>
#include <string>

#include "trainbench/model/cudnn_refusal.hpp"

using namespace trainbench;

TEST_CASE("cuDNN statuses that decline a problem for its parameters, and those that are failures") {
  for (const int code : {2000, 3000, 3001, 3002, 3003, 3004, 3010, 3011, 3012}) {
    INFO(code);
    CHECK(cudnn_status_declines(code));
  }
  // Success; misuse (BAD_PARAM's sub-codes); the driver, runtime, architecture and libraries,
  // which fail every shape alike; internal errors and allocations; execution.
  for (const int code : {0, 1000, 1008, 2002, 2003, 2004, 2007, 2011, 3005, 3006, 3007, 3008, 3009, 3013, 3014, 4000,
                         4003, 4004, 5000, 5003}) {
    INFO(code);
    CHECK_FALSE(cudnn_status_declines(code));
  }
}

TEST_CASE("a cuDNN frontend message declines only where every status it names declines") {
  using n = cudnn_status_names;
  CHECK(judge_cudnn_status_names("No valid engine configs for BN_FWD\n") == n::none);
  // The frontend quotes a failed check as "CUDNN_STATUS_SUCCESS != call(...)": not a status.
  CHECK(judge_cudnn_status_names("CUDNN_STATUS_SUCCESS != getSizeOfDescriptor(descriptorType, size)") == n::none);
  CHECK(judge_cudnn_status_names("[cudnn_frontend] Error: plan build failed cudnn_status: "
                                 "CUDNN_STATUS_NOT_SUPPORTED_SHAPE") == n::decline);
  CHECK(judge_cudnn_status_names("cudnn_status: CUDNN_STATUS_NOT_SUPPORTED; cudnn_status: "
                                 "CUDNN_STATUS_BAD_PARAM") == n::decline);
  // One plan out of memory among refusals: a failure, never remembered as the shape's refusal.
  CHECK(judge_cudnn_status_names("cudnn_status: CUDNN_STATUS_NOT_SUPPORTED; cudnn_status: "
                                 "CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED") == n::failure);
  // BAD_PARAM's sub-codes name misuse, NOT_SUPPORTED's environment codes the host: not a shape's.
  CHECK(judge_cudnn_status_names("and code: CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED") == n::failure);
  CHECK(judge_cudnn_status_names("and code: CUDNN_STATUS_BAD_PARAM_NULL_POINTER") == n::failure);
  CHECK(judge_cudnn_status_names("cudnn_status: CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH") == n::failure);
  CHECK(judge_cudnn_status_names("cudnn_status: CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED") == n::failure);
  CHECK(judge_cudnn_status_names("cudnn_status: CUDNN_STATUS_EXECUTION_FAILED_CUDART") == n::failure);
  // A name is read whole, at its end of string too; a longer word holding the prefix is not one.
  CHECK(judge_cudnn_status_names("CUDNN_STATUS_NOT_SUPPORTED") == n::decline);
  CHECK(judge_cudnn_status_names("MY_CUDNN_STATUS_INTERNAL_ERROR") == n::none);
}
