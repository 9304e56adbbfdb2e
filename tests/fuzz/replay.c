/* SPDX-License-Identifier: Apache-2.0 */
/* replay.c - runs a fuzz target's corpus as an ordinary test (for builds without libFuzzer). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long len;

	if (!f)
		return -1;
	if (fseek(f, 0, SEEK_END) || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET)) {
		fclose(f);
		return -1;
	}
	buf = malloc(len ? (size_t)len : 1);
	if (!buf || fread(buf, 1, (size_t)len, f) != (size_t)len) {
		free(buf);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(buf, (size_t)len);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	int n = 0;

	for (int i = 1; i < argc; i++) {
		DIR *d = opendir(argv[i]);
		struct dirent *e;

		if (!d) {
			if (run_file(argv[i])) {
				fprintf(stderr, "replay: cannot read %s\n", argv[i]);
				return 1;
			}
			n++;
			continue;
		}
		while ((e = readdir(d))) {
			char path[4096];
			if (e->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
			if (run_file(path)) {
				fprintf(stderr, "replay: cannot read %s\n", path);
				closedir(d);
				return 1;
			}
			n++;
		}
		closedir(d);
	}
	if (n == 0) {
		fprintf(stderr, "replay: empty corpus\n");
		return 1;
	}
	printf("replayed %d inputs\n", n);
	return 0;
}
