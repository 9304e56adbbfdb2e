/* SPDX-License-Identifier: Apache-2.0 */
/*
 * engine.c - a minimal inference-engine client of weightd: connect, declare a unit of parameter
 * slots, validate, bind, use, release. Copy it as a starting point.
 *
 *   weightd-example [--socket PATH] [--hold SECONDS] CHECKPOINT
 *
 * Binds every tensor of CHECKPOINT as one unit, prints for each slot where its memory lives
 * (device:inode of the shared-memory object, so two runs can be compared) and a checksum of its
 * bytes, holds the unit for SECONDS (default 0), then releases it.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <weightd/client.h>

struct layer_slot {
	const void *data;  /* bind stores the address here */
};

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "hold", required_argument, NULL, 'H' },
		{ NULL, 0, NULL, 0 },
	};
	const char *socket_path = NULL, *checkpoint;
	weightd_client *c = NULL;
	weightd_description *d = NULL;
	weightd_unit *u = NULL;
	struct layer_slot *slots = NULL;
	weightd_error err;
	int opt, hold = 0, rc = 1;

	while ((opt = getopt_long(argc, argv, "s:H:", opts, NULL)) != -1) {
		if (opt == 's')
			socket_path = optarg;
		else if (opt == 'H')
			hold = atoi(optarg);
		else
			return 2;
	}
	if (optind + 1 != argc) {
		fprintf(stderr, "usage: weightd-example [--socket PATH] [--hold SECONDS] CHECKPOINT\n");
		return 2;
	}
	checkpoint = argv[optind];

	/* 1. Connect (NULL socket: $WEIGHTD_SOCKET or the system socket). */
	if (weightd_connect(socket_path, "weightd-example", &c, &err) < 0)
		goto fail;
	/* 2. Learn the tensor table; a real engine knows its slots from its model definition. */
	if (weightd_describe(c, checkpoint, &d, &err) < 0)
		goto fail;
	slots = calloc(d->n_tensors ? d->n_tensors : 1, sizeof(*slots));
	if (!slots || weightd_unit_new(c, &u, &err) < 0)
		goto fail;
	/* 3. Declare each parameter slot with the dtype and shape the engine expects, and where
	 *    bind should store its address; then say where its content comes from. */
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];
		if (weightd_unit_slot(u, t->name, t->dtype, t->shape, t->ndim, (void **)&slots[i].data,
				      &err) < 0 ||
		    weightd_unit_set_tensor(u, t->name, checkpoint, t->name, NULL, &err) < 0)
			goto fail;
	}
	/* 4. One request for the whole unit; the daemon materializes (or shares) while we wait. */
	if (weightd_unit_submit(u, &err) < 0)
		goto fail;
	/* 5. Every fallible step (checks, mmap) happens here; on failure nothing is held. */
	if (weightd_unit_validate(u, &err) < 0)
		goto fail;
	/* 6. Publish the pointers: cannot fail, so the engine never sees half a model. */
	weightd_unit_bind(u);

	printf("pid %d bound %zu weights of %s; the daemon read %llu bytes for this unit\n",
	       (int)getpid(), d->n_tensors, checkpoint,
	       (unsigned long long)weightd_unit_bytes_read(u));
	for (size_t i = 0; i < d->n_tensors; i++) {
		const weightd_tensor_info *t = &d->tensors[i];
		const weightd_weight *w = weightd_unit_weight(u, t->name);
		const unsigned char *p = slots[i].data;
		unsigned long long sum = 0;
		struct stat st;

		/* 7. Use the weights: plain read-only memory. */
		for (uint64_t k = 0; k < t->nbytes; k++)
			sum = sum * 31 + p[k];
		fstat(weightd_weight_fd(w), &st);
		/* many weights share one segment: the same dev:ino, each at its own offset */
		printf("  %-44s %-5s %10llu bytes  shm %llu:%llu +%llu  checksum %016llx\n", t->name,
		       t->dtype, (unsigned long long)t->nbytes, (unsigned long long)st.st_dev,
		       (unsigned long long)st.st_ino,
		       (unsigned long long)weightd_weight_offset(w), sum);
	}
	fflush(stdout);
	if (hold > 0)
		sleep((unsigned)hold);
	rc = 0;
	goto out;
fail:
	fprintf(stderr, "weightd-example: %s\n", err.message);
out:
	/* 8. Release: unmaps and gives the references back. */
	weightd_unit_free(u);
	weightd_description_free(d);
	free(slots);
	weightd_close(c);
	return rc;
}
