#pragma once
// How long this process has existed (no torch here): what a fresh process costs before it
// measures anything, counted from its start, not from main() (loading LibTorch comes first).

namespace trainbench {

// Seconds since the kernel started this process (/proc/self/stat's start time against
// CLOCK_BOOTTIME; resolution one clock tick, 10 ms). Negative when it cannot be read.
double seconds_since_process_start();

}  // namespace trainbench
