#include "tessera/cli/launcher/rendezvous.h"

#include <chrono>
#include <sstream>
#include <thread>

#include "tessera/core/check.h"
#include "tessera/core/logging.h"

namespace tessera::cli {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);

comm::Bytes bytes(const std::string& s) { return comm::Bytes(s.begin(), s.end()); }
std::string text(const comm::Bytes& b) { return std::string(b.begin(), b.end()); }

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0));
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

std::string serialize(const RoundEnd& e) {
  return std::to_string(e.final) + "\n" + std::to_string(e.counts) + "\n" +
         std::to_string(e.exit_code) + "\n" + e.summary + "\n" + e.error_json;
}

RoundEnd deserialize(const std::string& s) {
  RoundEnd e;
  e.ended = true;
  std::istringstream in(s);
  std::string line;
  std::getline(in, line);
  e.final = line == "1";
  std::getline(in, line);
  e.counts = line == "1";
  std::getline(in, line);
  e.exit_code = std::atoi(line.c_str());
  std::getline(in, e.summary);
  std::stringstream rest;
  rest << in.rdbuf();
  e.error_json = rest.str();
  return e;
}

}  // namespace

AgentRendezvous::AgentRendezvous(const RendezvousSettings& s) : settings_(s) {
  TS_CHECK_T(ConfigError, s.min_nodes >= 1 && s.min_nodes <= s.max_nodes, "--nnodes ",
             s.min_nodes, ":", s.max_nodes, " needs 1 <= MIN <= MAX");
  if (s.is_host) {
    server_ = std::make_unique<comm::TcpStoreServer>(s.bind_addr.empty() ? s.addr : s.bind_addr,
                                                     s.port, s.token);
    settings_.port = server_->port();
    store_ = std::make_unique<comm::TcpStore>(s.addr, settings_.port, s.token, millis(10));
  } else {
    store_ = std::make_unique<comm::TcpStore>(s.addr, s.port, s.token, millis(s.join_timeout));
  }
  // Blocking calls (a claimed end being written, a member's details) are short;
  // a store that does not answer within the node timeout is gone.
  store_->set_timeout(millis(std::max(1.0, s.node_timeout)));
}

AgentRendezvous::~AgentRendezvous() {
  store_.reset();
  server_.reset();
}

std::string AgentRendezvous::key(const std::string& name) const {
  return "rdzv/" + settings_.id + "/" + name;
}

std::string AgentRendezvous::round_key(const std::string& name) const {
  return key("r" + std::to_string(round_) + "/" + name);
}

RoundPlan AgentRendezvous::join(const std::function<bool()>& stop) {
  ++round_;
  beats_.clear();
  if (settings_.is_host) return host_close(stop);
  Deadline overall(settings_.join_timeout + settings_.last_call + settings_.node_timeout);
  while (true) {
    // Rounds that ended before we got here are history.
    while (store_->check({round_key("ended")})) ++round_;
    const int64_t index = store_->add(round_key("arrived"), 1);
    store_->set(round_key("info/" + std::to_string(index)),
                bytes(settings_.node_name + "\n" + std::to_string(settings_.nproc)));
    while (!store_->check({round_key("closed")})) {
      if (store_->check({round_key("refused")})) {
        TS_THROW(ConfigError, text(store_->get(round_key("refused"))));
      }
      TS_CHECK(!stop(), "stopped while waiting for round ", round_, " to close");
      TS_CHECK_T(StoreError, !overall.expired(), "node 0 at ", settings_.addr, ":",
                 settings_.port, " did not close round ", round_, " within ",
                 settings_.join_timeout + settings_.last_call,
                 " s (is node 0 running with the same --rdzv-id '", settings_.id, "'?)");
      std::this_thread::sleep_for(kPoll);
    }
    const int64_t members = std::stoll(text(store_->get(round_key("closed"))));
    if (index < members) {
      plan_.round = round_;
      plan_.node_rank = static_cast<int>(index);
      plan_.nnodes = static_cast<int>(members);
      plan_.node_names = split_lines(text(store_->get(round_key("names"))));
      return plan_;
    }
    // Late: wait for this round to end, then join the next one.
    store_->add(round_key("waiting"), 1);
    TS_LOG(INFO) << "tessera run: round " << round_ << " closed with " << members
                 << " nodes before " << settings_.node_name
                 << " arrived; waiting for the next round";
    while (!store_->check({round_key("ended")})) {
      TS_CHECK(!stop(), "stopped while waiting for the next round");
      if (store_->check({key("finished")})) {
        plan_ = RoundPlan{};
        plan_.round = round_;
        plan_.nnodes = 0;  // the job is over
        return plan_;
      }
      std::this_thread::sleep_for(kPoll);
    }
    ++round_;
    overall = Deadline(settings_.join_timeout + settings_.last_call + settings_.node_timeout);
  }
}

RoundPlan AgentRendezvous::host_close(const std::function<bool()>& stop) {
  const RendezvousSettings& s = settings_;
  Deadline join_deadline(s.join_timeout);
  std::unique_ptr<Deadline> last_call;
  // After the first round node 0 knows whom to expect: the last round's members
  // that were not declared lost, plus the agents that waited to be admitted.
  // Once they are all here there is nobody to give a last call to.
  int64_t expected = s.max_nodes;
  if (round_ > 0) {
    expected = plan_.nnodes - lost_ + store_->add(key("r" + std::to_string(round_ - 1) + "/waiting"), 0);
  }
  lost_ = 0;
  int64_t n = 1;
  while (true) {
    n = 1 + store_->add(round_key("arrived"), 0);
    if (n >= s.max_nodes || (n >= expected && n >= s.min_nodes)) break;
    if (n >= s.min_nodes) {
      if (!last_call) last_call = std::make_unique<Deadline>(s.last_call);
      if (last_call->expired()) break;
    }
    if (join_deadline.expired()) {
      std::ostringstream msg;
      msg << "only " << n << " of the " << s.min_nodes << " nodes --nnodes asks for joined round "
          << round_ << " within the join timeout (" << s.join_timeout
          << " s); check that every host's tessera run reaches " << s.addr << ":" << s.port
          << " with the same job token and --rdzv-id";
      store_->set(round_key("refused"), bytes(msg.str()));
      TS_THROW(StoreError, msg.str());
    }
    TS_CHECK(!stop(), "stopped while waiting for nodes to join round ", round_);
    std::this_thread::sleep_for(kPoll);
  }
  if (n > s.max_nodes) n = s.max_nodes;
  plan_ = RoundPlan{};
  plan_.round = round_;
  plan_.node_rank = 0;
  plan_.nnodes = static_cast<int>(n);
  plan_.node_names.push_back(s.node_name);
  std::string names = s.node_name;
  for (int64_t k = 1; k < n; ++k) {
    auto info = split_lines(text(store_->get(round_key("info/" + std::to_string(k)))));
    const std::string name = info.empty() ? "?" : info[0];
    const int nproc = info.size() > 1 ? std::atoi(info[1].c_str()) : -1;
    if (nproc != s.nproc) {
      std::ostringstream msg;
      msg << "host " << name << " starts " << nproc << " workers (-n) but node 0 (" << s.node_name
          << ") starts " << s.nproc << "; every node of the job must pass the same -n";
      store_->set(round_key("refused"), bytes(msg.str()));
      TS_THROW(ConfigError, msg.str());
    }
    plan_.node_names.push_back(name);
    names += "\n" + name;
  }
  store_->set(round_key("names"), bytes(names));
  store_->set(round_key("closed"), bytes(std::to_string(n)));
  return plan_;
}

RoundEnd AgentRendezvous::read_end() {
  if (!store_->check({round_key("ended")})) return RoundEnd{};
  return deserialize(text(store_->get(round_key("end_detail"))));
}

RoundEnd AgentRendezvous::monitor() {
  store_->add(round_key("hb/" + std::to_string(plan_.node_rank)), 1);
  if (settings_.is_host) {
    for (int k = 1; k < plan_.nnodes; ++k) {
      if (store_->check({round_key("done/" + std::to_string(k))})) continue;
      const int64_t beat = store_->add(round_key("hb/" + std::to_string(k)), 0);
      auto it = beats_.find(k);
      if (it == beats_.end() || it->second.first != beat) {
        beats_[k] = {beat, Stopwatch()};
        continue;
      }
      const double silent = it->second.second.seconds();
      if (silent > settings_.node_timeout) {
        RoundEnd lost;
        lost.exit_code = 1;
        std::ostringstream msg;
        msg << "node " << k << " (" << plan_.node_names[k] << ") sent no heartbeat for "
            << static_cast<int>(silent) << " s (--node-timeout " << settings_.node_timeout
            << "): declared lost";
        lost.summary = msg.str();
        RoundEnd end = end_round(lost);
        if (end.summary == lost.summary) lost_ = 1;  // ours was the round's end
        return end;
      }
    }
    if (plan_.nnodes < settings_.max_nodes && store_->add(round_key("waiting"), 0) > 0) {
      RoundEnd change;
      change.counts = false;
      change.summary = "a node is waiting to join (--nnodes " + std::to_string(settings_.min_nodes) +
                       ":" + std::to_string(settings_.max_nodes) +
                       "): restarting the workers to admit it";
      return end_round(change);
    }
  }
  return read_end();
}

RoundEnd AgentRendezvous::end_round(const RoundEnd& end) {
  if (store_->add(round_key("end_claim"), 1) == 1) {
    store_->set(round_key("end_detail"), bytes(serialize(end)));
    store_->set(round_key("ended"), bytes("1"));
  }
  store_->wait({round_key("ended")});
  return read_end();
}

void AgentRendezvous::finish() {
  store_->set(round_key("done/" + std::to_string(plan_.node_rank)), bytes("1"));
  if (!settings_.is_host) return;
  // Agents still waiting to be admitted learn that there is nothing to join.
  store_->set(key("finished"), bytes("1"));
  Deadline deadline(settings_.node_timeout);
  for (int k = 1; k < plan_.nnodes; ++k) {
    while (!store_->check({round_key("done/" + std::to_string(k))}) &&
           !store_->check({round_key("ended")}) && !deadline.expired()) {
      std::this_thread::sleep_for(kPoll);
    }
  }
}

}  // namespace tessera::cli
