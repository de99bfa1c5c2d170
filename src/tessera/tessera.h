// tessera/tessera.h: the whole public API in one include.
//
//   #include <tessera/tessera.h>
//
//   auto engine = tessera::initialize(model, tessera::Config::from_file("ds.json"));
//
// Link Tessera::tessera (CMake) or `pkg-config --libs tessera`. What is not reachable
// from here (backend internals, the CLI, kernels) is not installed and may change
// without notice. Narrower headers (tessera/comm/init.h, ...) compile faster when a
// translation unit needs only one layer.
#pragma once

#include "tessera/config.h"

// core: errors, checks, logging, environment.
#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"
#include "tessera/core/timer.h"

// comm: joining a job, process groups, collectives, stores, backends.
#include "tessera/comm/backend_registry.h"
#include "tessera/comm/base/memory_store.h"
#include "tessera/comm/base/prefix_store.h"
#include "tessera/comm/base/tcp_store.h"
#include "tessera/comm/init.h"
#include "tessera/comm/process_group.h"

// data: sampler and datasets.
#include "tessera/data/byte_text_dataset.h"
#include "tessera/data/distributed_sampler.h"
#include "tessera/data/text_to_tokens.h"
#include "tessera/data/token_file_dataset.h"

// checkpoint: sharded, verified, atomically committed checkpoints.
#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/checkpoint/group_coordinator.h"
#include "tessera/checkpoint/module_state.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/state_dict_file.h"

// models: the reference GPT and MLP.
#include "tessera/models/activation_checkpoint.h"
#include "tessera/models/gpt.h"
#include "tessera/models/mlp.h"
#include "tessera/models/moe.h"
#include "tessera/models/low_precision.h"

// parallel: the process mesh, tensor-parallel layers, pipeline schedules.
#include "tessera/parallel/context/block_attention.h"
#include "tessera/parallel/context/context_parallel.h"
#include "tessera/parallel/expert/expert_parallel.h"
#include "tessera/parallel/pipeline/batched_stage.h"
#include "tessera/parallel/pipeline/bert_pipeline_stage.h"
#include "tessera/parallel/pipeline/decoder_pipeline_stage.h"
#include "tessera/parallel/pipeline/gpt_pipeline_stage.h"
#include "tessera/parallel/pipeline/llama_pipeline_stage.h"
#include "tessera/parallel/pipeline/layer_pipeline_stage.h"
#include "tessera/parallel/pipeline/pipeline_executor.h"
#include "tessera/parallel/pipeline/pipeline_schedule.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/parallel/tensor/parallel_layers.h"
#include "tessera/parallel/tensor/tp_bert.h"
#include "tessera/parallel/tensor/tp_decoder.h"
#include "tessera/parallel/tensor/tp_gpt.h"
#include "tessera/parallel/tensor/tp_llama.h"
#include "tessera/parallel/tensor/tp_ops.h"
#include "tessera/parallel/topology.h"

// runtime: DistributedDataParallel, the Engine, config, optimizers, schedules.
#include "tessera/runtime/config.h"
#include "tessera/runtime/ddp/distributed_data_parallel.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/lr_schedules.h"
#include "tessera/runtime/model_parallel/model_parallel_engine.h"
#include "tessera/runtime/monitor/monitor_fanout.h"
#include "tessera/runtime/optimizer_factory.h"
