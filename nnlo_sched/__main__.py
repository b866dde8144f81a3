from nnlo_sched.cli import main

main()
