// ProcessGroup collectives and subgroups, checked against values every rank can
// compute on its own. Run: tessera run -n 2 ./collectives   (any number of ranks)
#include <tessera/tessera.h>
#include <ATen/ATen.h>

#include <cstdio>

using tessera::comm::ReduceOp;

int main() {
  tessera::init();
  auto world = tessera::default_group();
  const int rank = world->rank(), n = world->size();
  bool ok = true;
  auto expect = [&](bool cond, const char* what) {
    if (!cond) std::fprintf(stderr, "rank %d: %s is wrong\n", rank, what);
    ok = ok && cond;
  };

  // all_reduce: sum of (rank + 1) over the ranks is n (n + 1) / 2.
  auto t = at::full({3}, rank + 1.0);
  world->all_reduce(t, ReduceOp::kSum)->wait();
  expect(t.eq(n * (n + 1) / 2.0).all().item<bool>(), "all_reduce sum");

  // Asynchronous: queue two ops, then wait for both.
  auto a = at::full({2}, double(rank)), b = at::full({2}, double(rank));
  auto wa = world->all_reduce(a, ReduceOp::kMax);
  auto wb = world->all_reduce(b, ReduceOp::kMin);
  wa->wait();
  wb->wait();
  expect(a[0].item<double>() == n - 1 && b[0].item<double>() == 0, "async max/min");

  // broadcast from the last rank.
  auto c = at::full({4}, double(rank));
  world->broadcast(c, n - 1)->wait();
  expect(c.eq(n - 1).all().item<bool>(), "broadcast");

  // all_gather: output i holds rank i's input.
  std::vector<at::Tensor> gathered;
  for (int i = 0; i < n; ++i) gathered.push_back(at::empty({2}, at::kLong));
  world->all_gather(gathered, at::full({2}, int64_t(10 * rank), at::kLong))->wait();
  for (int i = 0; i < n; ++i) expect(gathered[i][1].item<int64_t>() == 10 * i, "all_gather");

  // reduce_scatter: every rank contributes 0..3n-1; rank r gets the sum of its shard.
  auto in = at::arange(3 * n, at::kFloat), out = at::empty({3});
  world->reduce_scatter(out, in, ReduceOp::kSum)->wait();
  expect(out[0].item<float>() == float(n * 3 * rank), "reduce_scatter");

  // Subgroups: even and odd ranks. Every rank takes part in creating both; each
  // gets its own group and nullptr for the other.
  std::vector<int> evens, odds;
  for (int r = 0; r < n; ++r) (r % 2 ? odds : evens).push_back(r);
  auto even_group = world->new_subgroup(evens);
  auto odd_group = odds.empty() ? nullptr : world->new_subgroup(odds);
  auto mine = rank % 2 ? odd_group : even_group;
  expect(mine != nullptr && (rank % 2 ? even_group : odd_group) == nullptr, "subgroup membership");
  auto s = at::full({1}, double(rank));
  mine->all_reduce(s, ReduceOp::kSum)->wait();
  double expected = 0;
  for (int r : (rank % 2 ? odds : evens)) expected += r;
  expect(s.item<double>() == expected, "subgroup all_reduce");

  world->barrier()->wait();
  if (rank == 0 && ok) std::printf("OK collectives and subgroups on %d ranks\n", n);
  tessera::shutdown();
  return ok ? 0 : 1;
}
