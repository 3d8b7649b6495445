#include "tools/gemtb/stop_signals.h"

#include <csignal>

namespace gemtb::cli {
namespace {

volatile std::sig_atomic_t g_received = 0;

extern "C" void OnStopSignal(int signal) { g_received = signal; }

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction action = {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a write in progress continues; the loop checks between steps
  sigaction(SIGTERM, &action, &old_term_);
  sigaction(SIGINT, &action, &old_int_);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
}

int StopSignals::received() const { return g_received; }

const char* SignalName(int signal) {
  switch (signal) {
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    default: return "a signal";
  }
}

}  // namespace gemtb::cli
