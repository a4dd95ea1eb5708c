// traceviz client script: owned by the pages work
