from perflab.tools.cli import main

raise SystemExit(main())
