/* Prints one line per MPI rank: "rank R of N on HOST". */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank = 0, size = 0, length = 0;
    char host[MPI_MAX_PROCESSOR_NAME];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &length);
    /* A collective across every rank: the line prints only once all ranks reached each other. */
    MPI_Barrier(MPI_COMM_WORLD);
    printf("rank %d of %d on %s\n", rank, size, host);
    MPI_Finalize();
    return 0;
}
