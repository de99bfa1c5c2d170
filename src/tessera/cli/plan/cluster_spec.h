// ClusterSpec: the machines `tessera plan` plans for, as the few rates its cost
// model needs, and the presets (`--cluster host | a100-80g | h100 | h200`).
//
// Bandwidths are *bus* bandwidths in the nccl-tests sense (docs/plan.md): a
// collective over n ranks of S bytes takes alpha per step plus S·f(n)/busbw,
// f = 2(n-1)/n for all-reduce, (n-1)/n for reduce-scatter and all-gather. A
// group inside one node runs at intra_busbw; a group spanning nodes is limited
// by the network, k ranks of the group per node sharing k devices' share of the
// node's NICs: min(intra_busbw, k · inter_busbw_per_device).
//
// "host" is this machine: each rank ("device") is a process with one compute
// thread; ranks share the cores, the memory and its bandwidth, so per-device
// rates are the node's divided among the ranks when there are more ranks than
// cores (node_peak_flops, node_memory_bw).
// Pure values; host_preset() reads /proc and sysconf only.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli::plan {

enum class Precision { kFp32, kBf16, kFp16 };
Precision parse_precision(const std::string& name);  // fp32 | bf16 | fp16
const char* precision_name(Precision p);

struct ClusterSpec {
  std::string name;
  int devices_per_node = 1;
  int nodes = 1;
  double memory_bytes = 0;     // usable memory per device
  double peak_flops_fp32 = 0;  // dense GEMM rate per device
  double peak_flops_16 = 0;    // bf16/fp16 dense GEMM rate per device
  double node_peak_flops = 0;  // > 0: all devices of a node share this rate (host)
  double memory_bw = 0;        // per device (optimizer step: bytes of state / memory_bw)
  double node_memory_bw = 0;   // > 0: shared by the devices of a node (host)
  double intra_busbw = 0;      // bytes/s, collectives inside a node
  double intra_alpha = 0;      // seconds per step of a collective inside a node
  double inter_busbw = 0;      // bytes/s per device of the network (its NIC share)
  double inter_alpha = 0;      // seconds per step across nodes
  double offload_bw = 0;       // bytes/s to where offloaded state lives (PCIe, disk)
  double mfu = 0.4;            // default model FLOPs utilization of compute
  // Fraction of the communication that can run behind computation (DDP buckets
  // during backward, ZeRO-3 prefetches). 0 where communication needs the same
  // cores as compute (host).
  double overlap = 1.0;
  // Host: cores of a node (0: devices do not share cores). With more ranks than
  // cores, a blocking collective among them waits until the members the
  // scheduler has parked get a core back: about one time slice each
  // (oversubscribed_sync seconds), on the critical path.
  int cores_per_node = 0;
  double oversubscribed_sync = 0;
  double price_per_device_hour = 0;
  std::string peak_source = "preset";  // where the peak FLOP/s came from

  int world() const { return devices_per_node * nodes; }
  // The per-device GEMM rate at this precision, after the node cap.
  double device_flops(Precision p) const;
  // The per-device memory bandwidth after the node cap.
  double device_memory_bw() const;
  // Bus bandwidth and per-step latency of a collective over `group` ranks placed
  // `per_node` to a node (per_node == group: inside one node).
  double busbw(int group, int per_node) const;
  double alpha(int group, int per_node) const;
  // Seconds a blocking collective loses to oversubscription (0 unless the node
  // runs more devices than it has cores).
  double sync_penalty() const;
  void validate() const;
};

// "host" (this machine), "a100-80g", "h100", "h200"; devices_per_node and nodes
// are then set from the flags.
ClusterSpec cluster_preset(const std::string& name, int devices_per_node);
std::vector<std::string> cluster_preset_names();

// This host's fp32 GEMM rate of one core (FLOP/s) when nothing was measured:
// 58 GFLOP/s, the 512x512 rate on this development machine's cores.
constexpr double kHostCoreGemmFlops = 58e9;

}  // namespace tessera::cli::plan
