// The NCCL library this build links, as NCCL reports it ("2.28.9"). Needs no GPU.
// Internal (comm/nccl/ is built only with TESSERA_WITH_NCCL).
#pragma once

#include <string>

namespace tessera::comm {

std::string nccl_version();

}  // namespace tessera::comm
