#pragma once
// Counts the calling thread's allocations through the global operator new (which this test
// binary replaces, see alloc_count.cpp), so a test can hold code to "no allocation per batch after
// warmup". Other threads' allocations are not counted.
#include <cstdint>

namespace tbtest {

class thread_allocations {
 public:
  thread_allocations();  // counts from here on this thread
  ~thread_allocations();
  thread_allocations(const thread_allocations&) = delete;
  thread_allocations& operator=(const thread_allocations&) = delete;
  std::int64_t count() const;  // allocations so far

 private:
  std::int64_t start_;
  bool outer_;
};

}  // namespace tbtest
