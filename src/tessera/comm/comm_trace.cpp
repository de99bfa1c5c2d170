#include "tessera/comm/comm_trace.h"

#include <string>

#include "tessera/comm/comm_events.h"
#include "tessera/core/error.h"
#include "tessera/core/trace.h"

namespace tessera::comm {

CommTrace::CommTrace(int rank) {
  listener_ = add_comm_listener([rank](const CommEvent& e) {
    if (!trace::enabled()) return;
    if (rank >= 0 && context_rank() >= 0 && context_rank() != rank) return;
    const std::string group = e.group ? *e.group : std::string("?");
    const char* prefix = e.op == OpType::kSend ? "send " : e.op == OpType::kRecv ? "recv " : "comm ";
    const int lane = trace::lane(prefix + group);
    std::string args = "\"bytes\":" + std::to_string(e.payload_bytes) +
                       ",\"wire_bytes\":" + std::to_string(e.wire_bytes) + ",\"group\":\"" + group +
                       "\",\"group_size\":" + std::to_string(e.group_size) +
                       ",\"queued_us\":" +
                       std::to_string((e.times.started_ns - e.times.enqueued_ns) / 1000);
    if (e.seq > 0) args += ",\"seq\":" + std::to_string(e.seq);
    if (e.peer >= 0) args += ",\"peer\":" + std::to_string(e.peer);
    if (!e.ok) args += ",\"failed\":true";
    trace::record(to_string(e.op), "comm", e.times.started_ns, e.times.finished_ns, lane, args);
  });
}

CommTrace::~CommTrace() { remove_comm_listener(listener_); }

}  // namespace tessera::comm
