/* main.c - weightd's entry point. */
#include <stdio.h>

int main(void)
{
	fprintf(stderr, "weightd: not assembled yet\n");
	return 1;
}
