/* Byte sizes on the command lines of the C benchmark tools (shared by
 * mpi_allreduce_peer.c and memcpy_bandwidth.c, spelled like tessera bench's). */
#pragma once

#include <stdlib.h>

/* "1024", "1K", "32M", "1MB", "2GiB" -> bytes (binary multiples); -1 when malformed. */
static inline long long parse_bytes(const char* s) {
  char* end = NULL;
  long long v = strtoll(s, &end, 10);
  if (end == s || v < 0) return -1;
  long long mult = 1;
  switch (*end) {
    case '\0': return v;
    case 'k': case 'K': mult = 1LL << 10; break;
    case 'm': case 'M': mult = 1LL << 20; break;
    case 'g': case 'G': mult = 1LL << 30; break;
    case 'b': case 'B': mult = 1; break;
    default: return -1;
  }
  ++end;
  if (*end == 'i') ++end;
  if (*end == 'b' || *end == 'B') ++end;
  return *end == '\0' ? v * mult : -1;
}
