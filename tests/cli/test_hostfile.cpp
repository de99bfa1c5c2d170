// The multi-host launcher without processes: hostfile and -H parsing (DeepSpeed's
// and Horovod's layouts), --include/--exclude/--num-nodes/--num-procs-per-node,
// the environment passed to every host (.tessera_env), the ssh and agent
// command lines, and the elastic flags of `tessera run`.
#include <gtest/gtest.h>

#include <fstream>

#include "tessera/cli/launcher/hostfile.h"
#include "tessera/cli/launcher/launch_options.h"
#include "tessera/cli/launcher/ssh_launch.h"
#include "tessera/core/error.h"
#include "testing/files.h"

namespace tessera::cli {
namespace {

template <typename F>
std::string config_error(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "<no error>";
}

std::vector<std::string> names(const std::vector<HostSlots>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) out.push_back(h.host + "=" + std::to_string(h.slots.size()));
  return out;
}

TEST(Hostfile, ReadsDeepSpeedAndHorovodLinesWithCommentsAndBlanks) {
  auto hosts = parse_hostfile(
      "# the cluster\n"
      "worker-1 slots=4\n"
      "\n"
      "  worker-2:4   # Horovod's form\n"
      "10.0.0.3 slots=4\n"
      "worker-4\n",
      "hosts.txt");
  EXPECT_EQ(names(hosts), (std::vector<std::string>{"worker-1=4", "worker-2=4", "10.0.0.3=4",
                                                    "worker-4=1"}));
  EXPECT_EQ(hosts[0].slots, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(names(parse_host_list("a:2, b:2,c")),
            (std::vector<std::string>{"a=2", "b=2", "c=1"}));
}

TEST(Hostfile, MistakesNameTheFileAndLine) {
  auto err = [](const std::string& text) {
    return config_error([&] { parse_hostfile(text, "hosts.txt"); });
  };
  EXPECT_NE(err("a slots=2\nb slot=2\n").find("hosts.txt:2: expected 'HOST slots=N' or 'HOST:N'"),
            std::string::npos);
  EXPECT_NE(err("a slots=2\n\nb slots=x\n")
                .find("hosts.txt:3: the slot count must be a number from 1 to 4096, got 'x'"),
            std::string::npos);
  EXPECT_NE(err("a:0\n").find("hosts.txt:1: the slot count"), std::string::npos);
  EXPECT_NE(err("a slots=2\na:2\n").find("hosts.txt:2: host 'a' is listed twice"),
            std::string::npos);
  EXPECT_NE(err("a slots=2 extra\n").find("hosts.txt:1"), std::string::npos);
  EXPECT_NE(err("bad$host slots=1\n").find("hosts.txt:1: 'bad$host' is not a host name"),
            std::string::npos);
  EXPECT_NE(err("# only a comment\n\n").find("hosts.txt lists no hosts"), std::string::npos);
  EXPECT_NE(config_error([] { read_hostfile("/nonexistent/hosts"); })
                .find("cannot read the hostfile /nonexistent/hosts"),
            std::string::npos);
  EXPECT_NE(config_error([] { parse_host_list("a:2,,b:2"); }).find("an empty host entry"),
            std::string::npos);
}

TEST(Hostfile, IncludeExcludeNumNodesAndProcsLikeDeepSpeed) {
  const auto all = parse_hostfile("h1 slots=4\nh2 slots=4\nh3 slots=4\n", "f");
  HostSelection sel;
  sel.include = "h1:0,2@h3:1,3";
  auto inc = select_hosts(all, sel);
  EXPECT_EQ(names(inc), (std::vector<std::string>{"h1=2", "h3=2"}));
  EXPECT_EQ(inc[0].slots, (std::vector<int>{0, 2}));
  sel = {};
  sel.exclude = "h2";
  EXPECT_EQ(names(select_hosts(all, sel)), (std::vector<std::string>{"h1=4", "h3=4"}));
  sel = {};
  sel.num_nodes = 2;
  sel.procs_per_node = 3;
  EXPECT_EQ(names(select_hosts(all, sel)), (std::vector<std::string>{"h1=3", "h2=3"}));
}

TEST(Hostfile, SelectionMistakesAndUnevenSlotsAreErrors) {
  const auto all = parse_hostfile("h1 slots=4\nh2 slots=2\n", "f");
  auto err = [&](HostSelection sel) { return config_error([&] { select_hosts(all, sel); }); };
  HostSelection sel;
  EXPECT_NE(err(sel).find("host 'h2' has 2 slots but host 'h1' has 4; every host runs the same "
                          "number of workers (pass --num-procs-per-node 2"),
            std::string::npos);
  sel.procs_per_node = 2;
  EXPECT_EQ(err(sel), "<no error>");
  sel = {};
  sel.include = "h9";
  EXPECT_NE(err(sel).find("--include: host 'h9' is not in the host list"), std::string::npos);
  sel.include = "h1:7";
  EXPECT_NE(err(sel).find("--include: host 'h1' has no slot 7 (it has 4)"), std::string::npos);
  sel = {};
  sel.include = "h1";
  sel.exclude = "h2";
  EXPECT_NE(err(sel).find("--include and --exclude cannot be used together"), std::string::npos);
  sel = {};
  sel.exclude = "h1@h2";
  EXPECT_NE(err(sel).find("no host is left"), std::string::npos);
  sel = {};
  sel.num_nodes = 3;
  EXPECT_NE(err(sel).find("--num-nodes 3 asks for more hosts than the 2 available"),
            std::string::npos);
}

TEST(SshLaunch, ForwardsTesseraNcclOmpAndTheNamesOfTesseraEnv) {
  testing::TempDir dir("hostenv");
  const std::string file = dir.path() + "/.tessera_env";
  std::ofstream(file) << "# extra variables\nPYTHONPATH\nexport DATA_ROOT=/data/x\nUNSET_ONE\n";
  auto env = forwarded_environment({"TESSERA_TIMEOUT=30", "NCCL_DEBUG=INFO", "OMP_NUM_THREADS=2",
                                    "PYTHONPATH=/opt/py", "SECRET=no", "PATH=/bin"},
                                   file);
  EXPECT_EQ(env, (std::vector<std::string>{"DATA_ROOT=/data/x", "NCCL_DEBUG=INFO",
                                           "OMP_NUM_THREADS=2", "PYTHONPATH=/opt/py",
                                           "TESSERA_TIMEOUT=30"}));
  std::ofstream(file) << "GOOD\nBAD NAME\n";
  EXPECT_NE(config_error([&] { forwarded_environment({}, file); })
                .find(file + ":2: expected NAME or NAME=value, got 'BAD NAME'"),
            std::string::npos);
}

TEST(SshLaunch, SshAndAgentCommandLines) {
  auto o = parse_launch_options({"--hostfile", "h", "--ssh-port", "2222", "--ssh-option",
                                 "IdentityFile=/k", "--nnodes", "2:3", "--max-restarts", "3",
                                 "--rdzv-id", "job7", "prog", "it's"});
  EXPECT_TRUE(o.over_ssh());
  EXPECT_EQ(ssh_command(o, "h1", "true"),
            (std::vector<std::string>{"ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
                                      "-o", "ServerAliveInterval=5", "-o",
                                      "ServerAliveCountMax=3", "-p", "2222", "-o",
                                      "IdentityFile=/k", "h1", "true"}));
  const std::string cmd = agent_command(o, 1, 2, 2, 3, "h0", "/work dir", "/usr/bin/tessera");
  EXPECT_EQ(cmd.rfind("cd '/work dir' && exec /usr/bin/tessera run --agent-env-stdin --nnodes 2:3 "
                      "--node-rank 1 -n 2 --master-addr h0 ",
                      0),
            0u)
      << cmd;
  EXPECT_NE(cmd.find("--max-restarts 3"), std::string::npos) << cmd;
  EXPECT_NE(cmd.find("--rdzv-id job7"), std::string::npos) << cmd;
  EXPECT_NE(cmd.find(" -- prog 'it'\\''s'"), std::string::npos) << cmd;
  EXPECT_EQ(cmd.find("TESSERA_JOB_TOKEN"), std::string::npos) << "the token must not be on argv";
  EXPECT_EQ(shell_quote("a b"), "'a b'");
  EXPECT_EQ(shell_quote(""), "''");
}

TEST(SshLaunch, ElasticFlags) {
  auto o = parse_launch_options({"--nnodes", "2:4", "--node-rank", "0", "--monitor-interval",
                                 "0.2", "--join-timeout", "60", "--last-call-timeout", "3",
                                 "--node-timeout", "9", "--rdzv-endpoint", "10.0.0.1:29400",
                                 "prog"});
  EXPECT_EQ(o.min_nodes, 2);
  EXPECT_EQ(o.nnodes, 4);
  EXPECT_DOUBLE_EQ(o.monitor_interval, 0.2);
  EXPECT_DOUBLE_EQ(o.join_timeout, 60);
  EXPECT_DOUBLE_EQ(o.last_call_timeout, 3);
  EXPECT_DOUBLE_EQ(o.node_timeout, 9);
  EXPECT_EQ(o.rdzv_endpoint, "10.0.0.1:29400");
  auto err = [](const std::vector<std::string>& args) {
    return config_error([&] { parse_launch_options(args); });
  };
  EXPECT_NE(err({"--nnodes", "3:2", "p"}).find("--nnodes"), std::string::npos);
  EXPECT_NE(err({"--nnodes", "0:2", "p"}).find("--nnodes"), std::string::npos);
  EXPECT_NE(err({"--rdzv-endpoint", "nohost", "--nnodes", "2", "p"}).find("--rdzv-endpoint"),
            std::string::npos);
  EXPECT_NE(err({"--hostfile", "h", "-H", "a:1", "p"}).find("--hostfile"), std::string::npos);
}

}  // namespace
}  // namespace tessera::cli
