package vecindex

func useAVX2AndFMA() bool { return useAVX2 }
