"""Stand-in: what ``openrlhf.utils.distributed_util.stateless_init_process_group`` uses."""
