/*
 * slurm-hello: the smallest MPI program, for t/slurm.t.
 *
 * Each rank prints one line, "rank R of N on HOST", and nothing else, so
 * the test can tell a real two-rank job (rank 0 of 2, rank 1 of 2) from
 * two singletons (rank 0 of 1, twice): what an MPI without PMIx support
 * does under srun --mpi=pmix.
 */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    char host[MPI_MAX_PROCESSOR_NAME];
    int rank, size, len;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    printf("rank %d of %d on %s\n", rank, size, host);
    fflush(stdout);
    MPI_Finalize();
    return 0;
}
