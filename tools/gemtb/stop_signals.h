// SIGTERM and SIGINT as a request to stop, polled by a long command between units of work (a
// training step), so that it can finish the unit, save and exit cleanly instead of dying mid-way.
// While a StopSignals lives, the two signals only set the request; its destructor restores the
// previous handlers.
#ifndef GEMTB_TOOLS_GEMTB_STOP_SIGNALS_H_
#define GEMTB_TOOLS_GEMTB_STOP_SIGNALS_H_

#include <signal.h>

namespace gemtb::cli {

class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The signal received (SIGTERM or SIGINT), or 0.
  int received() const;

 private:
  struct sigaction old_term_, old_int_;
};

// "SIGTERM", "SIGINT", or "a signal" for any other.
const char* SignalName(int signal);

}  // namespace gemtb::cli

#endif  // GEMTB_TOOLS_GEMTB_STOP_SIGNALS_H_
