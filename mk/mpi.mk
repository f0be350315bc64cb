# mk/mpi.mk - context parallelism over MPI (examples/context_parallel_mpi.c): K/V of a
# long sequence sharded across ranks, partials merged with sdpa_merge. Needs Open MPI
# (Debian: libopenmpi-dev openmpi-bin).
#   make mpi-example     build $(BUILD)/context_parallel_mpi
#   make mpi-test        run it on 2 and 3 ranks: ring (prefill) and all-gather (decode),
#                        causal and not; each run ends with its agreement with one
#                        process's sdpa_forward
MPICC  ?= mpicc
MPIRUN ?= mpirun --oversubscribe
MPI_NPS ?= 2 3

.PHONY: mpi-example mpi-test
$(BUILD)/context_parallel_mpi: examples/context_parallel_mpi.c $(BUILD)/libsdpa.a
	@command -v $(MPICC) >/dev/null || { echo "make mpi-example needs Open MPI:" \
	  "apt-get install libopenmpi-dev openmpi-bin"; exit 1; }
	OMPI_CC=$(CC) $(MPICC) -std=c11 $(WARN) $(CPPFLAGS) $(CFLAGS) -Iinclude -o $@ $< \
	  $(BUILD)/libsdpa.a $(LDLIBS)

mpi-example: $(BUILD)/context_parallel_mpi

# Open MPI refuses root unless told; one OpenMP thread per rank, as ranks share the cores.
mpi-test: $(BUILD)/context_parallel_mpi
	@for n in $(MPI_NPS); do \
	  for args in "--mode ring --causal 1" "--mode ring --causal 1 --len-q 250" \
	              "--mode ring --causal 0 --len-q 301" \
	              "--mode allgather --causal 1" "--mode allgather --causal 0 --len-q 5"; do \
	    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
	      $(MPIRUN) -np $$n ./$(BUILD)/context_parallel_mpi $$args || exit 1; \
	  done; \
	done
