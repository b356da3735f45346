// scripts/reference/pytorch_run.py reads the compile rung and the best configuration, and runs
// them on the CPU: torch.compile (traced with the aot_eager backend, which generates no kernels,
// so the check takes seconds), channels_last and SGD(fused=True), and says so in its report.
#include <catch2/catch.hpp>
#include <cmath>

#include "helpers.hpp"

TEST_CASE("the PyTorch reference runs the compile rung and the best configurations on the CPU") {
  const auto dir = tbtest::scratch("reference-compile");
  const std::string small =
      " --set device=cpu --set threads=1 --set data.source=synthetic --set data.samples=16 --set data.source_size=8"
      " --set data.image_size=16 --set data.workers=0 --set data.pin_memory=false --set train.batch_size=4"
      " --set transfer.non_blocking=false --set transfer.copy_stream=false --set backend.cudnn_benchmark=false"
      " --set backend.tf32=false --set measure.warmup_batches=1 --set measure.measured_batches=1"
      " --set measure.repeats=1";
  // fp16 with GradScaler handing scale and found_inf to the fused SGD, then bf16.
  for (const char* rel : {"configs/ladder/06-compile.yaml", "configs/best/01-compile-bf16.yaml"}) {
    INFO(rel);
    const auto out = dir / "r.json";
    const auto r = tbtest::run_shell("'" TRAINBENCH_TEST_PYTHON
                                     "' scripts/reference/pytorch_run.py --trainbench \"$TB\""
                                     " --compile-backend aot_eager --config " +
                                     std::string(rel) + small + " --out '" + out.string() + "'");
    INFO(r.output);
    REQUIRE(r.code == 0);
    const auto j = tbtest::read_json(out);
    CHECK(j["status"] == "ok");
    CHECK(j["effective"]["compile"] == nlohmann::json({"channels_last", "torch.compile", "fused_sgd"}));
    CHECK(j["effective"]["channels_last"] == true);
    const std::string step = j["effective"]["step"];
    CHECK(step.find("torch.compile(model, backend='aot_eager')") != std::string::npos);
    CHECK(step.find("SGD(fused=True)") != std::string::npos);
    CHECK(std::isfinite(j["results"]["loss"]["last"].get<double>()));
    CHECK(j["results"]["samples_per_s"]["median"].get<double>() > 0);
  }
}

// A source the reference has no loader for is refused, not replaced by one reused device batch
// that would be measured as the profile's workload.
TEST_CASE("the PyTorch reference refuses a data source it has no loader for") {
  const auto dir = tbtest::scratch("reference-source");
  const auto r = tbtest::run_shell("'" TRAINBENCH_TEST_PYTHON "' scripts/reference/pytorch_run.py --trainbench \"$TB\""
                                   " --config configs/imagenet/00-baseline.yaml --set device=cpu --out '" +
                                   (dir / "r.json").string() + "'");
  INFO(r.output);
  CHECK(r.code != 0);
  CHECK(r.output.find("data.source imagefolder: the reference has no loader for it") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir / "r.json"));
}
