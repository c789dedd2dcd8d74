/*
 * Waits in ibv_get_async_event, as a program's event thread does, for
 * the event its daemon's going away raises: it prints "ready" once the
 * device is open, then the event, and exits 0 only if it is
 * IBV_EVENT_DEVICE_FATAL and the next ibv_get_async_event fails with EIO,
 * as a disassociated device's does, rather than wait forever.
 */
#include <errno.h>
#include <stdio.h>

#include <infiniband/verbs.h>

int main(void)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_context *ctx;
	struct ibv_async_event ev;

	if (!list || !list[0] || !(ctx = ibv_open_device(list[0]))) {
		perror("ibv_open_device");
		return 2;
	}
	ibv_free_device_list(list);
	printf("ready\n");
	fflush(stdout);
	if (ibv_get_async_event(ctx, &ev)) {
		perror("ibv_get_async_event");
		return 2;
	}
	printf("event: %s\n", ibv_event_type_str(ev.event_type));
	ibv_ack_async_event(&ev);
	if (ev.event_type == IBV_EVENT_DEVICE_FATAL && (!ibv_get_async_event(ctx, &ev) || errno != EIO)) {
		perror("ibv_get_async_event after IBV_EVENT_DEVICE_FATAL");
		return 1;
	}
	ibv_close_device(ctx);
	return ev.event_type == IBV_EVENT_DEVICE_FATAL ? 0 : 1;
}
